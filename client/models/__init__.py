"""tensorwire.models (in progress)."""
