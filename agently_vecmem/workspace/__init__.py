"""Durable storage: the Chroma-backed Workspace."""

from ..search.view import Hit, ScopeView
from .chroma import ChromaWorkspace

__all__ = ["ChromaWorkspace", "Hit", "ScopeView"]
