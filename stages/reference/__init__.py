"""DVC stage ``reference@<set>``: RMIA's reference fine-tunes (``reference.sets``)."""
