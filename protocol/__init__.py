"""What every part of tensorwire shares: dtypes, the op table, the graph IR, the wire format, errors."""

#: 2: batches may number their outputs from one id and name temporaries (batch_ids); 3: a direct channel's answer
#: carries small fetched values in its header (wire.INLINE_MAX)
PROTOCOL_VERSION = 3
