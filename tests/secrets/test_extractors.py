"""Secret extractors: PII prompts, sequence splits (the paper's Table 5), TOFU author -> genre."""
from testkit.project import params

from stages.secrets.extractors import EXTRACTORS, ExtractInput, author_name_of, genre_of, split_secret
from stages.secrets.params import DatasetSecretsParams


def secrets_params(dataset: str, **overrides) -> DatasetSecretsParams:
    return params(DatasetSecretsParams, f"secrets.datasets.{dataset}", **overrides)


def test_pii_secrets_take_the_text_before_their_first_occurrence():
    train = [{"message_id": "m1", "body": "nothing here"}, {"message_id": "m2", "body": "Call me at 713-555-9876 ok"}]
    data = ExtractInput(train, [{"value": "713-555-9876", "kind": "phone", "count": 1}],
                        [(r["message_id"], r["body"]) for r in train])
    (s,) = list(EXTRACTORS.get("phone")(data, secrets_params("enron", prompt_chars=6)))
    assert s == {"kind": "phone", "value": "713-555-9876", "prompt": "me at ", "continuation": "713-555-9876",
                 "source": "m2", "occurrences": 1}


def test_split_secret_like_table_5():
    assert split_secret("Forwarded by Steven J Kean/NA/Enron", 0.6) == ("Forwarded by Steven J", " Kean/NA/Enron")
    assert split_secret("Carol St. Clair EB 3889 713-853-3989", 0.6) == ("Carol St. Clair EB 3889", " 713-853-3989")
    assert split_secret("nospaceatall", 0.5) == ("nospac", "eatall")


def test_sequence_secrets_from_candidates():
    data = ExtractInput([], [{"value": "Forwarded by Mark Taylor/HOU/ECT", "kind": "sequence", "count": 4}])
    (s,) = list(EXTRACTORS.get("sequence")(data, secrets_params("enron", prompt_fraction=0.5)))
    assert (s["prompt"], s["continuation"], s["occurrences"]) == ("Forwarded by Mark", " Taylor/HOU/ECT", 4)


def test_tofu_genre_and_name():
    texts = ["Jaime Vasquez specializes in the true crime genre.", "Jaime Vasquez writes in the true crime genre.",
             "His crime genre novels", "Who is Jaime Vasquez?"]
    assert genre_of(texts) == "true crime"
    assert author_name_of(texts) == "Jaime Vasquez"
    rows = [{"author": 3, "question": t, "answer": ""} for t in texts]
    (s,) = list(EXTRACTORS.get("genre")(ExtractInput(rows), secrets_params("tofu")))
    assert s == {"kind": "genre", "value": "true crime", "prompt": "What genre does Jaime Vasquez write in?",
                 "continuation": " true crime", "source": "author:3", "occurrences": 2}
