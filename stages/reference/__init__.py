"""DVC stage ``reference@<set>``: RMIA's reference fine-tunes (``attack.references.sets``)."""
