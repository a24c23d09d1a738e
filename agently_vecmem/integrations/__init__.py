"""Edges to other frameworks. Only the Agently modules here import ``agently`` (``agently.py`` shared,
``agently_workspace.py`` for 4.1.3.9–4.1.4.1, ``agently_recordstore.py``/``agently_context.py`` for 4.1.4.2+;
``agently_records.py`` is their agently-free storage layer); nothing here is imported by the base package."""
