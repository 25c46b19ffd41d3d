"""SageMaker's API served on gpugov's policy (docs/interop.md "HyperPod's API"), driven by
boto3's SageMaker client, as a HyperPod user runs it, against a live server: SigV4 checked, each
operation mapped through the HyperPod import, errors in AWS's shapes, every change audited."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.auth
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from django.conf import settings

from allocations.interop import hyperpod
from allocations.interop import services as interop_services
from allocations.models import AccessKey, AuditEntry, ClusterPolicy, PriorityClass, Team, TeamQuota
from allocations.services import access_keys
from allocations.services import policy as policy_services
from tests.conftest import Personas

pytestmark = pytest.mark.django_db(transaction=True)
FIXTURES = Path(__file__).parent / "fixtures"
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcde12345fg"


_CLIENTS: list[Any] = []


@pytest.fixture(autouse=True)
def close_clients(live_server: Any) -> Iterator[None]:
    """Close each client's kept-alive connection while the live server still runs: the server's
    thread would otherwise close it after the test database is gone."""
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def client_for(live_server: Any, user: Any, *, secret: str | None = None, region: str | None = None) -> Any:
    """boto3's SageMaker client signed with a new access key of ``user``."""
    key, made_secret = access_keys.access_key_create(user=user, actor=user)
    client = boto3.client(
        "sagemaker",
        endpoint_url=f"{live_server.url}/aws/sagemaker/",
        region_name=region or settings.GPUGOV_AWS_REGION,
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=secret or made_secret,
        config=Config(retries={"total_max_attempts": 1}),
    )
    _CLIENTS.append(client)
    return client


def error_of(call: Any, **params: Any) -> tuple[str, str, int]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    error = caught.value.response["Error"]
    return error["Code"], error["Message"], caught.value.response["ResponseMetadata"]["HTTPStatusCode"]


def quota_request(team: str = "team-a", gpus: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "Name": f"{team}-api",
        "ClusterArn": ARN,
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": gpus}],
            "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 50},
            "PreemptTeamTasks": "LowerPriority",
        },
        "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 10},
        **extra,
    }


@pytest.fixture
def admin_client(personas: Personas, live_server: Any) -> Any:
    return client_for(live_server, personas.cluster_admin)


def quota_id(client: Any, team: str) -> str:
    summaries = client.list_compute_quotas()["ComputeQuotaSummaries"]
    return next(s["ComputeQuotaId"] for s in summaries if s["ComputeQuotaTarget"]["TeamName"] == team)


# --- Each operation ------------------------------------------------------------------------------
def test_a_team_set_up_in_gpugov_is_listed_and_described_as_its_export(admin_client: Any) -> None:
    summaries = admin_client.list_compute_quotas()["ComputeQuotaSummaries"]
    assert sorted(s["ComputeQuotaTarget"]["TeamName"] for s in summaries) == ["team-a", "team-b"]
    exported = {
        q["ComputeQuotaTarget"]["TeamName"]: q for q in hyperpod.export_policy().bundle["ComputeQuotas"]
    }
    described = admin_client.describe_compute_quota(ComputeQuotaId=quota_id(admin_client, "team-a"))
    for member in (
        "Name",
        "ClusterArn",
        "ComputeQuotaConfig",
        "ComputeQuotaTarget",
        "ActivationState",
        "Description",
    ):
        assert described[member] == exported["team-a"][member], member
    assert described["ComputeQuotaVersion"] == 1
    assert described["Status"] == "Created"
    assert described["ComputeQuotaArn"].startswith("arn:aws:sagemaker:us-west-2:")
    assert isinstance(described["CreationTime"], datetime)


def test_update_sets_the_teams_quota_and_counts_a_version(admin_client: Any, personas: Personas) -> None:
    qid = quota_id(admin_client, "team-a")
    answer = admin_client.update_compute_quota(
        ComputeQuotaId=qid,
        TargetVersion=1,
        ComputeQuotaConfig=quota_request(gpus=6)["ComputeQuotaConfig"],
        ActivationState="Disabled",
        Description="Team A via the API",
    )
    assert answer["ComputeQuotaVersion"] == 2
    team = Team.objects.get(name="team-a")
    assert (team.active, team.display_name) == (False, "Team A via the API")
    assert TeamQuota.objects.get(team=team, instance_type=personas.instance_type).quota == 6
    described = admin_client.describe_compute_quota(ComputeQuotaId=qid)
    assert described["ComputeQuotaVersion"] == 2
    assert described["Status"] == "Updated"


def test_delete_then_create_gives_the_team_its_quota_back_under_a_new_id(
    admin_client: Any, personas: Personas
) -> None:
    qid = quota_id(admin_client, "team-b")
    admin_client.delete_compute_quota(ComputeQuotaId=qid)
    assert TeamQuota.objects.get(team=personas.other_team).quota == 0
    assert Team.objects.filter(name="team-b").exists()  # its members and jobs stay
    code, _, _ = error_of(admin_client.describe_compute_quota, ComputeQuotaId=qid)
    assert code == "ResourceNotFound"
    created = admin_client.create_compute_quota(**quota_request("team-b", gpus=3))
    assert created["ComputeQuotaId"] != qid
    assert created["ComputeQuotaArn"].endswith(f"compute-quota/{created['ComputeQuotaId']}")
    assert TeamQuota.objects.get(team=personas.other_team).quota == 3
    assert (
        admin_client.describe_compute_quota(ComputeQuotaId=created["ComputeQuotaId"])["Name"] == "team-b-api"
    )


def test_scheduler_config_describe_update_delete_create(admin_client: Any) -> None:
    listed = admin_client.list_cluster_scheduler_configs()["ClusterSchedulerConfigSummaries"]
    assert len(listed) == 1
    sid = listed[0]["ClusterSchedulerConfigId"]
    described = admin_client.describe_cluster_scheduler_config(ClusterSchedulerConfigId=sid)
    assert (
        described["SchedulerConfig"]
        == hyperpod.export_policy().bundle["ClusterSchedulerConfig"]["SchedulerConfig"]
    )
    config = {"PriorityClasses": [{"Name": "urgent", "Weight": 95}], "FairShare": "Disabled"}
    answer = admin_client.update_cluster_scheduler_config(
        ClusterSchedulerConfigId=sid, TargetVersion=1, SchedulerConfig=config, Description="by the API"
    )
    assert answer["ClusterSchedulerConfigVersion"] == 2
    assert dict(PriorityClass.objects.values_list("name", "weight")) == {"urgent": 95}
    assert ClusterPolicy.objects.get().idle_allocation == "first-come-first-serve"
    assert (
        admin_client.describe_cluster_scheduler_config(ClusterSchedulerConfigId=sid)["Description"]
        == "by the API"
    )

    admin_client.delete_cluster_scheduler_config(ClusterSchedulerConfigId=sid)
    assert not PriorityClass.objects.exists()
    assert ClusterPolicy.objects.get().idle_allocation == "fair-share"
    assert admin_client.list_cluster_scheduler_configs()["ClusterSchedulerConfigSummaries"] == []
    created = admin_client.create_cluster_scheduler_config(
        Name="again", ClusterArn=ARN, SchedulerConfig={"PriorityClasses": [{"Name": "batch", "Weight": 5}]}
    )
    assert created["ClusterSchedulerConfigId"] != sid
    assert dict(PriorityClass.objects.values_list("name", "weight")) == {"batch": 5}


def test_lists_filter_and_page(admin_client: Any) -> None:
    first = admin_client.list_compute_quotas(MaxResults=1, SortBy="Name", SortOrder="Ascending")
    assert [s["Name"] for s in first["ComputeQuotaSummaries"]] == ["team-a-quota"]
    second = admin_client.list_compute_quotas(
        MaxResults=1, SortBy="Name", SortOrder="Ascending", NextToken=first["NextToken"]
    )
    assert [s["Name"] for s in second["ComputeQuotaSummaries"]] == ["team-b-quota"]
    assert "NextToken" not in second
    assert [
        s["Name"] for s in admin_client.list_compute_quotas(NameContains="b-q")["ComputeQuotaSummaries"]
    ] == ["team-b-quota"]
    later = datetime.now(UTC) + timedelta(hours=1)
    assert admin_client.list_compute_quotas(CreatedAfter=later)["ComputeQuotaSummaries"] == []


# --- A HyperPod policy round trip ----------------------------------------------------------------
def with_sagemaker_defaults(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with the values SageMaker gives what it leaves out (and the export states)."""
    request = json.loads(json.dumps(request))
    request.setdefault("ActivationState", "Enabled")
    request["ComputeQuotaTarget"].setdefault("FairShareWeight", 0)
    request["ComputeQuotaConfig"].setdefault("PreemptTeamTasks", "LowerPriority")
    return request


def test_an_imported_hyperpod_policy_reads_back_through_the_api_equal_to_its_export(
    live_server: Any, personas: Personas
) -> None:
    """The acceptance of issue 30: the fixture imports, exports back equal, and List/Describe give
    every request back as the export has it."""
    # The personas' teams with no display name and the fixture's cluster: what the fixture says.
    Team.objects.update(display_name="")
    personas.cluster.backend_settings = {"hyperpod_cluster_arn": ARN}
    personas.cluster.save()
    text = (FIXTURES / "hyperpod-bundle.json").read_text()
    imported = hyperpod.parse(text)
    interop_services.policy_import_apply(actor=personas.cluster_admin, imported=imported)
    bundle = hyperpod.export_policy().bundle
    document = json.loads(text)
    assert (
        bundle["ClusterSchedulerConfig"]["SchedulerConfig"]
        == document["ClusterSchedulerConfig"]["SchedulerConfig"]
    )

    client = client_for(live_server, personas.cluster_admin)
    summaries = {
        s["ComputeQuotaTarget"]["TeamName"]: s
        for s in client.list_compute_quotas(MaxResults=100)["ComputeQuotaSummaries"]
    }
    for request in document["ComputeQuotas"]:
        team = request["ComputeQuotaTarget"]["TeamName"]
        exported = next(q for q in bundle["ComputeQuotas"] if q["ComputeQuotaTarget"]["TeamName"] == team)
        described = client.describe_compute_quota(ComputeQuotaId=summaries[team]["ComputeQuotaId"])
        expected = with_sagemaker_defaults(request)
        for member in ("Name", "ClusterArn", "ComputeQuotaConfig", "ComputeQuotaTarget", "ActivationState"):
            assert described[member] == exported[member] == expected[member], (team, member)
        assert described.get("Description") == request.get("Description")
    sid = client.list_cluster_scheduler_configs()["ClusterSchedulerConfigSummaries"][0][
        "ClusterSchedulerConfigId"
    ]
    described = client.describe_cluster_scheduler_config(ClusterSchedulerConfigId=sid)
    assert described["SchedulerConfig"] == document["ClusterSchedulerConfig"]["SchedulerConfig"]


def test_a_hyperpod_policy_created_through_the_api_exports_back_equal(
    live_server: Any, personas: Personas
) -> None:
    """The other way round: each request of the fixture sent as a Create (after a Delete of
    what was there) gives back, in the export and in Describe, the request as sent."""
    from tests import factories as f

    f.make_team("team-c")
    Team.objects.update(display_name="")
    personas.cluster.backend_settings = {"hyperpod_cluster_arn": ARN}
    personas.cluster.save()
    document = json.loads((FIXTURES / "hyperpod-bundle.json").read_text())
    client = client_for(live_server, personas.cluster_admin)

    (scheduler,) = client.list_cluster_scheduler_configs()["ClusterSchedulerConfigSummaries"]
    client.delete_cluster_scheduler_config(ClusterSchedulerConfigId=scheduler["ClusterSchedulerConfigId"])
    sid = client.create_cluster_scheduler_config(**document["ClusterSchedulerConfig"])[
        "ClusterSchedulerConfigId"
    ]
    ids = {}
    for summary in client.list_compute_quotas()["ComputeQuotaSummaries"]:
        client.delete_compute_quota(ComputeQuotaId=summary["ComputeQuotaId"])
    for request in document["ComputeQuotas"]:
        ids[request["ComputeQuotaTarget"]["TeamName"]] = client.create_compute_quota(**request)[
            "ComputeQuotaId"
        ]

    bundle = hyperpod.export_policy().bundle
    assert (
        bundle["ClusterSchedulerConfig"]["SchedulerConfig"]
        == document["ClusterSchedulerConfig"]["SchedulerConfig"]
    )
    described = client.describe_cluster_scheduler_config(ClusterSchedulerConfigId=sid)
    assert described["Name"] == document["ClusterSchedulerConfig"]["Name"]
    exported = {q["ComputeQuotaTarget"]["TeamName"]: q for q in bundle["ComputeQuotas"]}
    for request in document["ComputeQuotas"]:
        team = request["ComputeQuotaTarget"]["TeamName"]
        described = client.describe_compute_quota(ComputeQuotaId=ids[team])
        assert exported[team] == with_sagemaker_defaults(request), team
        for member, value in with_sagemaker_defaults(request).items():
            assert described[member] == value, (team, member)


# --- Errors in AWS's shapes ----------------------------------------------------------------------
def test_a_wrong_secret_is_invalid_signature(live_server: Any, personas: Personas) -> None:
    client = client_for(live_server, personas.cluster_admin, secret="x" * 40)
    code, message, status = error_of(client.list_compute_quotas)
    assert (code, status) == ("InvalidSignatureException", 400)
    assert "signature we calculated does not match" in message


def test_a_request_signed_for_another_region_is_refused(live_server: Any, personas: Personas) -> None:
    client = client_for(live_server, personas.cluster_admin, region="eu-west-1")
    code, message, _ = error_of(client.list_compute_quotas)
    assert code == "InvalidSignatureException"
    assert "'eu-west-1'" in message


def test_a_clock_more_than_15_minutes_off_is_refused(
    live_server: Any, personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = client_for(live_server, personas.cluster_admin)
    skewed = datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=20)
    # The client's clock, outside the server: botocore signs with this time.
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: skewed)
    code, message, _ = error_of(client.list_compute_quotas)
    assert code == "InvalidSignatureException"
    assert message.startswith("Signature expired:")


def test_an_unknown_or_revoked_key_is_unrecognized(live_server: Any, personas: Personas) -> None:
    client = client_for(live_server, personas.cluster_admin)
    key = AccessKey.objects.get(user=personas.cluster_admin)
    access_keys.access_key_revoke(actor=personas.cluster_admin, key=key)
    code, _, _ = error_of(client.list_compute_quotas)
    assert code == "UnrecognizedClientException"


def test_a_member_reads_their_teams_quota_but_may_not_change_it(live_server: Any, personas: Personas) -> None:
    member = client_for(live_server, personas.member)
    summaries = member.list_compute_quotas()["ComputeQuotaSummaries"]
    assert [s["ComputeQuotaTarget"]["TeamName"] for s in summaries] == ["team-a"]
    qid = summaries[0]["ComputeQuotaId"]
    code, message, _ = error_of(
        member.update_compute_quota, ComputeQuotaId=qid, TargetVersion=1, ActivationState="Disabled"
    )
    assert code == "AccessDeniedException"
    assert "bob" in message
    code, _, _ = error_of(member.create_compute_quota, **quota_request("team-a"))
    assert code == "AccessDeniedException"
    assert Team.objects.get(name="team-a").active


def test_another_teams_quota_is_not_found_for_a_member(live_server: Any, personas: Personas) -> None:
    admin = client_for(live_server, personas.cluster_admin)
    other_id = quota_id(admin, "team-b")
    member = client_for(live_server, personas.member)
    code, _, _ = error_of(member.describe_compute_quota, ComputeQuotaId=other_id)
    assert code == "ResourceNotFound"
    code, _, _ = error_of(member.delete_compute_quota, ComputeQuotaId=other_id)
    assert code == "ResourceNotFound"


def test_an_unknown_team_is_a_validation_error_naming_it(admin_client: Any) -> None:
    code, message, status = error_of(admin_client.create_compute_quota, **quota_request("team-zeta"))
    assert (code, status) == ("ValidationException", 400)
    assert "ComputeQuotaTarget.TeamName: 'team-zeta'" in message


def test_a_bad_value_is_a_validation_error_naming_the_field_and_value(admin_client: Any) -> None:
    qid = quota_id(admin_client, "team-a")
    config = quota_request(gpus=4)["ComputeQuotaConfig"]
    config["ComputeQuotaResources"][0]["InstanceType"] = "ml.p4d.24xlarge"  # SageMaker's, not this cluster's
    code, message, _ = error_of(
        admin_client.update_compute_quota, ComputeQuotaId=qid, TargetVersion=1, ComputeQuotaConfig=config
    )
    assert code == "ValidationException"
    assert "ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType: 'ml.p4d.24xlarge'" in message


def test_vcpu_and_memory_quotas_follow_the_instance_types_resources(
    admin_client: Any, personas: Personas
) -> None:
    """docs/resources.md 2: a quota names only resources its instance type counts; once the
    type declares vCPU and memory, the API sets and describes them as HyperPod does."""
    qid = quota_id(admin_client, "team-a")
    config = quota_request()["ComputeQuotaConfig"]
    config["ComputeQuotaResources"][0]["VCpu"] = 16.0
    code, message, _ = error_of(
        admin_client.update_compute_quota, ComputeQuotaId=qid, TargetVersion=1, ComputeQuotaConfig=config
    )
    assert code == "ValidationException"
    assert "VCpu: 16.0: ml.p5.48xlarge declares no vcpus" in message

    policy_services.instance_type_update(
        actor=personas.cluster_admin,
        instance_type=personas.instance_type,
        vcpus_per_node=192,
        memory_gib_per_node=2048,
    )
    version = admin_client.describe_compute_quota(ComputeQuotaId=qid)["ComputeQuotaVersion"]
    config["ComputeQuotaResources"][0]["MemoryInGiB"] = 300.0
    admin_client.update_compute_quota(ComputeQuotaId=qid, TargetVersion=version, ComputeQuotaConfig=config)
    (resource,) = admin_client.describe_compute_quota(ComputeQuotaId=qid)["ComputeQuotaConfig"][
        "ComputeQuotaResources"
    ]
    assert (resource["VCpu"], resource["MemoryInGiB"]) == (16.0, 300.0)


def test_a_stale_target_version_is_a_conflict(admin_client: Any, personas: Personas) -> None:
    qid = quota_id(admin_client, "team-a")
    # A change in the console counts a version too: version 1 is stale once it is made.
    policy_services.team_update(actor=personas.cluster_admin, team=personas.team, fair_share_weight=77)
    code, message, _ = error_of(
        admin_client.update_compute_quota, ComputeQuotaId=qid, TargetVersion=1, ActivationState="Disabled"
    )
    assert code == "ConflictException"
    assert "TargetVersion: 1 is not the current version 2" in message
    assert Team.objects.get(name="team-a").active


def test_creating_a_second_quota_for_a_team_is_a_conflict(admin_client: Any) -> None:
    code, _, _ = error_of(admin_client.create_compute_quota, **quota_request("team-a"))
    assert code == "ConflictException"


def test_deleting_an_unknown_id_is_resource_not_found(admin_client: Any) -> None:
    code, message, _ = error_of(admin_client.delete_compute_quota, ComputeQuotaId="abcdefabcdef")
    assert code == "ResourceNotFound"
    assert "'abcdefabcdef'" in message
    code, _, _ = error_of(
        admin_client.delete_cluster_scheduler_config, ClusterSchedulerConfigId="abcdefabcdef"
    )
    assert code == "ResourceNotFound"


# --- Audit ---------------------------------------------------------------------------------------
def test_every_change_is_audited_naming_the_access_key_never_the_secret(
    admin_client: Any, personas: Personas
) -> None:
    key = AccessKey.objects.get(user=personas.cluster_admin)
    before = AuditEntry.objects.count()
    admin_client.update_compute_quota(
        ComputeQuotaId=quota_id(admin_client, "team-a"),
        TargetVersion=1,
        ComputeQuotaConfig=quota_request(gpus=5)["ComputeQuotaConfig"],
    )
    entries = list(AuditEntry.objects.order_by("id")[before:])
    assert any(e.object_type == "team quota" and e.field == "quota" and e.new_value == "5" for e in entries)
    assert {e.actor_name for e in entries} == {f"admin (access key {key.access_key_id})"}
    assert all(e.actor_id == personas.cluster_admin.pk for e in entries)
    secret = access_keys.secret_for(key)
    assert not AuditEntry.objects.filter(new_value__contains=secret).exists()


def test_a_refused_change_writes_nothing(admin_client: Any) -> None:
    before = AuditEntry.objects.count()
    error_of(admin_client.create_compute_quota, **quota_request("team-zeta"))
    assert AuditEntry.objects.count() == before


# --- The protocol, below the client: what botocore never sends --------------------------------
def signer(user: Any) -> Callable[[str, bytes], Any]:
    """A function that POSTs a body to the endpoint with ``X-Amz-Target: target``, signed by
    botocore's SigV4 signer with a new access key of ``user`` (Django's test client: no server
    needed)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from django.test import Client

    key, secret = access_keys.access_key_create(user=user, actor=user)

    def post(target: str, body: bytes) -> Any:
        request = AWSRequest(
            method="POST",
            url="http://testserver/aws/sagemaker/",
            data=body,
            headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": target},
        )
        SigV4Auth(Credentials(key.access_key_id, secret), "sagemaker", settings.GPUGOV_AWS_REGION).add_auth(
            request
        )
        headers = {name: value for name, value in request.headers.items() if name.lower() != "content-type"}
        return Client().post(
            "/aws/sagemaker/", data=body, content_type="application/x-amz-json-1.1", headers=headers
        )

    return post


def signed_post(user: Any, target: str, body: bytes) -> Any:
    return signer(user)(target, body)


def body(response: Any) -> dict[str, Any]:
    return json.loads(response.content)


@pytest.mark.parametrize(
    ("target", "payload", "code"),
    [
        ("SageMaker.DescribeCluster", b"{}", "UnknownOperationException"),
        ("SageMaker.ListComputeQuotas", b"not json", "SerializationException"),
        ("SageMaker.ListComputeQuotas", b"[1, 2]", "SerializationException"),
        ("SageMaker.ListComputeQuotas", b"[" * 5000 + b"]" * 5000, "SerializationException"),
        ("SageMaker.ListComputeQuotas", b'{"MaxResults": 1000}', "ValidationException"),
        ("SageMaker.UpdateComputeQuota", b'{"ComputeQuotaId": "abcdefabcdef"}', "ValidationException"),
    ],
)
def test_a_bad_request_is_an_aws_error_never_a_500(
    personas: Personas, target: str, payload: bytes, code: str
) -> None:
    response = signed_post(personas.cluster_admin, target, payload)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/x-amz-json-1.1"
    assert body(response)["__type"] == code
    assert body(response)["message"]


def test_a_missing_field_is_named(personas: Personas) -> None:
    response = signed_post(
        personas.cluster_admin, "SageMaker.UpdateComputeQuota", b'{"ComputeQuotaId": "abcdefabcdef"}'
    )
    assert "TargetVersion: is required" in body(response)["message"]


def test_an_unsigned_request_or_a_get_is_refused_in_aws_shape(personas: Personas) -> None:
    from django.test import Client

    client = Client()
    client.force_login(personas.cluster_admin)  # a session alone is never accepted here
    unsigned = client.post(
        "/aws/sagemaker/",
        data=b"{}",
        content_type="application/x-amz-json-1.1",
        headers={"X-Amz-Target": "SageMaker.ListComputeQuotas"},
    )
    assert (unsigned.status_code, body(unsigned)["__type"]) == (400, "MissingAuthenticationTokenException")
    got = client.get("/aws/sagemaker/")
    assert (got.status_code, body(got)["__type"]) == (405, "UnknownOperationException")


def test_an_inactive_users_key_is_unrecognized(personas: Personas) -> None:
    personas.cluster_admin.is_active = False
    personas.cluster_admin.save()
    response = signed_post(personas.cluster_admin, "SageMaker.ListComputeQuotas", b"{}")
    assert body(response)["__type"] == "UnrecognizedClientException"


def test_a_create_naming_another_cluster_is_refused(admin_client: Any, personas: Personas) -> None:
    personas.cluster.backend_settings = {
        "hyperpod_cluster_arn": "arn:aws:sagemaker:us-west-2:111122223333:cluster/zzzzz12345zz"
    }
    personas.cluster.save()
    admin_client.delete_compute_quota(ComputeQuotaId=quota_id(admin_client, "team-b"))
    code, message, _ = error_of(admin_client.create_compute_quota, **quota_request("team-b"))
    assert code == "ValidationException"
    assert f"ClusterArn: {ARN!r}" in message
    # The configured ARN's account names the ARNs of the quotas.
    summary = admin_client.list_compute_quotas()["ComputeQuotaSummaries"][0]
    assert ":111122223333:compute-quota/" in summary["ComputeQuotaArn"]
    assert summary["ClusterArn"].endswith("zzzzz12345zz")


def test_team_roles_read_the_scheduler_config_and_outsiders_see_nothing(
    live_server: Any, personas: Personas
) -> None:
    viewer = client_for(live_server, personas.viewer)
    assert len(viewer.list_cluster_scheduler_configs()["ClusterSchedulerConfigSummaries"]) == 1
    outsider = client_for(live_server, personas.outsider)
    assert outsider.list_cluster_scheduler_configs()["ClusterSchedulerConfigSummaries"] == []
    assert outsider.list_compute_quotas()["ComputeQuotaSummaries"] == []


def test_an_admin_deleting_keys_in_the_django_admin_audits_each(personas: Personas) -> None:
    from django.test import Client

    key, _ = access_keys.access_key_create(user=personas.member, actor=personas.member)
    client = Client()
    client.force_login(personas.cluster_admin)
    personas.cluster_admin.is_superuser = True
    personas.cluster_admin.save()
    response = client.post(
        "/django-admin/allocations/accesskey/",
        {"action": "delete_selected", "_selected_action": [key.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not AccessKey.objects.exists()
    assert AuditEntry.objects.filter(
        object_type="access key", action="delete", actor=personas.cluster_admin
    ).exists()


# --- Two updates at once (PostgreSQL) ------------------------------------------------------------
@pytest.mark.postgres
def test_two_updates_of_one_version_at_once_give_one_change_and_one_conflict(
    live_server: Any, personas: Personas
) -> None:
    """Two clients read version 1 and update it at once: one wins, the other is a
    ConflictException, and the version counts the one change (not also the other's stale read).
    The API's table is locked until both wait, the window a race needs."""
    from django.db import connection

    from allocations.models import SageMakerResource
    from tests.races import race_behind_a_lock

    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL (SQLite lets one writer in at a time)")
    first, second = (client_for(live_server, personas.cluster_admin) for _ in range(2))
    qid = quota_id(first, "team-a")
    answers: dict[int, str] = {}

    def update(client: Any, gpus: int) -> None:
        config = quota_request(gpus=gpus)["ComputeQuotaConfig"]
        try:
            client.update_compute_quota(ComputeQuotaId=qid, TargetVersion=1, ComputeQuotaConfig=config)
            answers[gpus] = "ok"
        except ClientError as exc:
            answers[gpus] = exc.response["Error"]["Code"]

    both_in = race_behind_a_lock(
        SageMakerResource._meta.db_table, [lambda: update(first, 3), lambda: update(second, 5)], wait_s=30
    )
    assert both_in, "the two requests were not both waiting for a lock"
    assert sorted(answers.values()) == ["ConflictException", "ok"], answers
    winner = next(gpus for gpus, answer in answers.items() if answer == "ok")
    assert TeamQuota.objects.get(team=personas.team).quota == winner
    assert first.describe_compute_quota(ComputeQuotaId=qid)["ComputeQuotaVersion"] == 2


def test_a_list_costs_the_same_queries_for_2_or_12_teams(personas: Personas) -> None:
    """STYLE.md: API query counts do not grow with the data (once each team has its id)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests import factories as f

    post = signer(personas.cluster_admin)
    listing = b'{"MaxResults": 100}'

    def queries() -> int:
        post("SageMaker.ListComputeQuotas", listing)  # the first sight gives each team its id
        with CaptureQueriesContext(connection) as captured:
            response = post("SageMaker.ListComputeQuotas", listing)
        assert response.status_code == 200
        return len(captured)

    few = queries()
    for i in range(10):
        f.make_team(f"team-x{i}", {personas.instance_type: 0})
    assert queries() == few
    assert len(body(post("SageMaker.ListComputeQuotas", listing))["ComputeQuotaSummaries"]) == 12


def test_an_update_with_what_describe_gave_changes_nothing_in_the_policy(admin_client: Any) -> None:
    """Read, then write back unchanged (what a client that edits one field does first): no
    setting changes, so the trail gets no entry; the version still counts the update."""
    qid = quota_id(admin_client, "team-a")
    described = admin_client.describe_compute_quota(ComputeQuotaId=qid)
    before = AuditEntry.objects.count()
    answer = admin_client.update_compute_quota(
        ComputeQuotaId=qid,
        TargetVersion=described["ComputeQuotaVersion"],
        **{
            m: described[m]
            for m in ("ComputeQuotaConfig", "ComputeQuotaTarget", "ActivationState", "Description")
        },
    )
    assert answer["ComputeQuotaVersion"] == described["ComputeQuotaVersion"] + 1
    assert AuditEntry.objects.count() == before
    again = admin_client.describe_compute_quota(ComputeQuotaId=qid)
    assert {
        k: v
        for k, v in again.items()
        if k not in ("ComputeQuotaVersion", "Status", "LastModifiedTime", "ResponseMetadata")
    } == {
        k: v
        for k, v in described.items()
        if k not in ("ComputeQuotaVersion", "Status", "LastModifiedTime", "ResponseMetadata")
    }
