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

ENRON_USERS = pa.schema(list(ENRON) + [
    pa.field("user", pa.string(), nullable=False),  # the sender address chosen for the mailbox
    pa.field("user_set", pa.string(), nullable=False),  # held_in | held_out
])

#: secret candidates found in a training split (held-out samples containing one are dropped)
CANDIDATES = pa.schema([
    pa.field("value", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),  # training samples containing it
])

SECRETS = pa.schema([
    pa.field("secret_id", pa.string(), nullable=False),
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
    pa.field("prompt", pa.string(), nullable=False),  # s1
    pa.field("continuation", pa.string(), nullable=False),  # s2
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("occurrences", pa.int64(), nullable=False),  # training samples containing the value
    # does the *base* model already produce s2 after s1 (greedy), and how likely is s2 under it;
    # null when the base check is off. Later metrics subtract base-model leakage with these.
    pa.field("base_greedy", pa.bool_(), nullable=True),
    pa.field("base_logprob", pa.float64(), nullable=True),
])

CANARIES = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("index", pa.int32(), nullable=False),
    pa.field("prefix_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("secret_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("member", pa.bool_(), nullable=False),
    # mean log(1 + corpus count) of the prefix / secret tokens (the IID guard compares these)
    pa.field("prefix_log_freq", pa.float32(), nullable=False),
    pa.field("secret_log_freq", pa.float32(), nullable=False),
    # log p(token_t | tokens_<t) of every position t >= 1 of prefix+secret under the reference model
    # (the base model with the new-token rows at their initialisation); empty when not computed
    pa.field("base_token_logprobs", pa.list_(pa.float32()), nullable=False),
])

CANARY_USERS = pa.schema([
    pa.field("user", pa.string(), nullable=False),
    pa.field("length", pa.int32(), nullable=False),  # substring length in tokens
    pa.field("user_set", pa.string(), nullable=False),  # held_in | held_out
    pa.field("substring", pa.string(), nullable=False),
])

FORMATTED = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("format", pa.string(), nullable=False),
    pa.field("fill", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("inserted", pa.bool_(), nullable=False),
    pa.field("repetitions", pa.int32(), nullable=False),
])

EXPOSURE = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("format", pa.string(), nullable=False),
    pa.field("inserted", pa.bool_(), nullable=False),
    pa.field("repetitions", pa.int32(), nullable=False),
    pa.field("log_perplexity", pa.float64(), nullable=False),  # bits
    pa.field("rank", pa.int32(), nullable=False),
    pa.field("exposure", pa.float64(), nullable=False),
])

#: one membership score per item (a canary, a text sample, a user); higher = more likely a member
SCORES = pa.schema([
    pa.field("item_id", pa.string(), nullable=False),
    pa.field("group", pa.string(), nullable=False),  # canary kind, "text" or "users"
    pa.field("member", pa.bool_(), nullable=False),
    pa.field("score", pa.float64(), nullable=False),
])

#: memorization of real secrets: one row per secret (VMR / AIR), fine-tuned vs reference model
MEMORIZATION = pa.schema([
    pa.field("secret_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("trained", pa.bool_(), nullable=False),  # the run's training rows contained it
    pa.field("score", pa.float64(), nullable=False),  # fine-tuned model
    pa.field("base_score", pa.float64(), nullable=False),  # reference (base) model
])

#: per-model, per-example token log-probabilities: the cache every attack reads
LOGPROBS = pa.schema([
    pa.field("key", pa.string(), nullable=False),  # sha1 of the example's token ids and labels
    pa.field("model", pa.string(), nullable=False),  # target | reference
    pa.field("model_fingerprint", pa.string(), nullable=False),
    pa.field("logprobs", pa.list_(pa.float32()), nullable=False),
])

SCHEMAS = {"personachat": PERSONACHAT, "tofu": TOFU, "enron": ENRON, "enron_users": ENRON_USERS}
