"""A maintenance window's record on the nodes: the baseline (what every node looked like, and what served,
when it opened) and its store (a copy on every node, the newest wins).

Below operation/: the one state read (operation/state.py) carries the open window beside the releases.
maintenance/ opens, verifies and closes the window; this package only holds what it writes."""
