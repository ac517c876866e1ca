"""Ground Control's client for agents (no Django)."""
