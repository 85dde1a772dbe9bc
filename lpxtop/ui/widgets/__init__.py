"""Widgets for the main and detail screens; each renders one part of a Snapshot."""
