"""What every part of tensorwire shares: dtypes, the op table, the graph IR, the wire format, errors."""

PROTOCOL_VERSION = 2  # 2: batches may number their outputs from one id and name temporaries (batch_ids)
