"""Edges to other frameworks. ``integrations.agently`` is the only module that imports ``agently``;
nothing here is imported by the base package."""
