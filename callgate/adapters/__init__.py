"""Adapters that put callgate in front of agent frameworks' tools (each needs its own extra)."""
