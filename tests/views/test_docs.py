"""The project's documentation in the console (/docs/), its Markdown rendered safely, and the
pages that point at it: the footer, the policy form and the team form."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from allocations.documentation import render
from allocations.forms.policy import ClusterPolicyForm, TeamForm


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_index_lists_the_readme_and_every_page_of_docs(personas):
    html = client_for(personas.member).get("/docs/").content.decode()
    assert 'href="/docs/readme/"' in html and 'href="/docs/glossary/"' in html
    assert "Glossary: the words of the governance policy" in html
    assert 'href="/docs/simulation/"' in html


def test_a_page_is_rendered_with_its_headings_and_links_to_its_neighbours(personas):
    response = client_for(personas.member).get("/docs/readme/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<h1 id="gpugov">gpugov</h1>' in html
    assert '<a href="/docs/glossary/">docs/glossary.md</a>' in html  # [docs/glossary.md](docs/glossary.md)
    assert re.search(r"<pre><code( class=\"language-\w+\")?>make run", html)


@pytest.mark.parametrize("name", ["nope", "..", "README.md", "glossary.md"])
def test_a_name_that_is_not_a_served_document_is_404(personas, name):
    assert client_for(personas.member).get(f"/docs/{name}/").status_code == 404


def test_the_docs_need_a_login(db):
    response = Client().get("/docs/glossary/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_markdown_cannot_carry_html_and_code_stays_verbatim():
    html = render(
        "# Title <script>x</script>\n\nA **bold** `<b>code</b>` and [a](javascript:alert(1)) and *words*.\n\n"
        "```\n<i>kept</i> **not bold**\n```\n\n| a | b |\n|---|---|\n| `docs/engine.md` | <x> |\n\n- one\n  two\n- three\n"
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<strong>bold</strong>" in html and "<code>&lt;b&gt;code&lt;/b&gt;</code>" in html
    assert (
        'href="javascript' not in html
    )  # a link to anything but http(s), an anchor or a document: text only
    assert "<em>words</em>" in html
    assert "<pre><code>&lt;i&gt;kept&lt;/i&gt; **not bold**\n</code></pre>" in html
    assert '<td><a href="/docs/engine/"><code>docs/engine.md</code></a></td>\n<td>&lt;x&gt;</td>' in html
    assert "<li>one\ntwo</li>" in html and "<li>three</li>" in html


def test_the_footer_links_the_glossary_and_the_documentation(personas):
    html = client_for(personas.member).get("/docs/").content.decode()
    assert 'id="footer-glossary"' in html and 'href="/docs/glossary/"' in html
    assert 'id="footer-docs"' in html and "docs/glossary.md" not in html.split("<footer")[1]


@pytest.mark.django_db  # the team form offers the priority classes a team may use
def test_every_option_of_the_policy_forms_explains_itself():
    for form, fields in (
        (ClusterPolicyForm(), ("idle_allocation", "task_ranking", "queueing", "share_unallocated")),
        (TeamForm(), ("sharing", "preempt_team_tasks", "reclaim", "preempt_while_borrowing")),
    ):
        for name in fields:
            assert form.fields[name].help_text, name
    labels = [label for _, label in TeamForm().fields["preempt_while_borrowing"].choices]
    assert "Default (lower-priority; never when reclaim is never)" in labels
    assert not any("POLICY.md" in label for label in labels)


def test_the_policy_page_and_the_team_form_link_the_glossary(personas):
    admin = client_for(personas.cluster_admin)
    policy = admin.get("/console/policy/").content.decode()
    assert 'id="policy-glossary" href="/docs/glossary/"' in policy or (
        'href="/docs/glossary/" id="policy-glossary"' in policy
    )
    assert "Strict FIFO: it blocks the jobs behind it" in policy
    team = admin.get("/console/teams/team-a/").content.decode()
    assert 'class="glossary-link"' in team and "POLICY.md" not in team


def test_every_document_renders(personas):
    from allocations.documentation import documents

    client = client_for(personas.member)
    for document in documents():
        response = client.get(f"/docs/{document.name}/")
        assert response.status_code == 200, document.name
        assert "<h1 id=" in response.content.decode(), document.name
