"""Sequencing: a Runner executes ordered steps that undo themselves, emitting structured events."""
