"""tensorwire.utils (in progress)."""
