"""Adapters that put callgate in front of agent frameworks (each imports its framework lazily)."""
