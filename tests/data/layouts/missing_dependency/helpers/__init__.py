"""The project's helper package (its metrics module is missing)."""
