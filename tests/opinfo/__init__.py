"""PyTorch's operator database (``op_db``) run against tensorwire: the harness, its test and its report."""
