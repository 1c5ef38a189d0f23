"""Importers: one module per agent transcript format, each producing a Session."""
