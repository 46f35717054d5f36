"""tensorwire.nn (in progress)."""
