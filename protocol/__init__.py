"""What every part of tensorwire shares: dtypes, the op table, the graph IR, the wire format, errors."""

PROTOCOL_VERSION = 1
