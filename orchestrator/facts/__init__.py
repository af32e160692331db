"""Node facts (pyinfra's model): a fact is a constant script run on a node plus a pure parser of what it
printed, returning typed values. core.py gathers any set of them in ONE SSH round trip per node.

Below preflight, setup, deploy, maintenance and watching, which all read nodes through them: preflight
keeps only the judges (@check). A fact module registers its facts when imported; import the ones you use."""
