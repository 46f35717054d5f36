"""tensorwire.optim (in progress)."""
