"""DVC stage ``data_docs``: Great Expectations Data Docs of the data contracts (``build.py``)."""
