"""Enron secret candidates found at preprocessing: regex PII and maximal recurring character sequences."""
from stages.shared.datasets.ngrams import frequent_sequences
from stages.shared.datasets.pii import PII_PATTERNS


def test_pii_regexes():
    body = "Call me at (713) 853-1234 or 713-555-9876, fax 713.555.0000. Mail jane.doe@enron.com now. Ref 12-3456."
    assert PII_PATTERNS["phone"].findall(body) == ["(713) 853-1234", "713-555-9876", "713.555.0000"]
    assert PII_PATTERNS["email"].findall(body) == ["jane.doe@enron.com"]


def test_frequent_sequences_merge_overlapping_ngrams():
    sig = "Carol St. Clair\nEB 3889\n713-853-3989 (Phone)\n713-646-3393 (Fax)"
    texts = [f"msg {i} about deal {i * 7}. {sig}\nthanks {i}" for i in range(5)] + ["unrelated text " * 10]
    found = frequent_sequences(texts, n=20, top_k=500, min_count=2)
    assert found and found[0][1] == 5 and sig in found[0][0]
    # no returned sequence is contained in another one (maximal, non-overlapping)
    assert not any(a != b and a in b for a, _ in found for b, _ in found)
    assert frequent_sequences(texts, n=20, top_k=500, min_count=6) == []
