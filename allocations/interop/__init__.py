"""Policy interoperability: SageMaker HyperPod task governance requests (``hyperpod``), Kueue
manifests (``kueue``), and the checks of a request against SageMaker's model (``shapes``).

Everything gpugov's policy holds that the other system cannot express is reported in a list of
warnings next to the export, never dropped silently.
"""
