"""Arrow schemas of every parquet artifact the pipeline writes (checked on write and on read)."""
import pyarrow as pa

STATS = pa.schema([
    pa.field("step", pa.string(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
])

PERSONACHAT = pa.schema([
    pa.field("dialogue_id", pa.int32(), nullable=False),
    pa.field("persona", pa.list_(pa.string()), nullable=False),
    pa.field("partner", pa.list_(pa.string()), nullable=False),
    pa.field("self", pa.list_(pa.string()), nullable=False),
])

TOFU = pa.schema([
    pa.field("row", pa.int32(), nullable=False),
    pa.field("author", pa.int32(), nullable=False),
    pa.field("question", pa.string(), nullable=False),
    pa.field("answer", pa.string(), nullable=False),
])

ENRON = pa.schema([
    pa.field("message_id", pa.string(), nullable=False),
    pa.field("file", pa.string(), nullable=False),
    pa.field("mailbox", pa.string(), nullable=False),
    pa.field("sender", pa.string(), nullable=False),
    pa.field("recipients", pa.list_(pa.string()), nullable=False),
    pa.field("subject", pa.string(), nullable=False),
    pa.field("date", pa.string(), nullable=False),
    pa.field("body", pa.string(), nullable=False),
])

SECRETS = pa.schema([
    pa.field("secret_id", pa.string(), nullable=False),
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
    pa.field("prompt", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
])

CANARIES = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("index", pa.int32(), nullable=False),
    pa.field("prefix_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("secret_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("member", pa.bool_(), nullable=False),
])

SCORES = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("member", pa.bool_(), nullable=False),
    pa.field("score", pa.float64(), nullable=False),
])

SCHEMAS = {"personachat": PERSONACHAT, "tofu": TOFU, "enron": ENRON}
