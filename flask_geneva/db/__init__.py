"""Every statement on geneva's tables, and their vocabulary.

State enums and table names (``states``), column types, the write path (guarded
UPDATEs and INSERTs, ``write_path`` and ``row_updates``), the locking reads
(``locks``), the read queries (``queries/``), dialect quirks (``sqlite``,
``mysql``) and the install units (``install/``). Below ``models``: it needs the
vocabulary, never an ORM class. No module outside this folder builds a statement
on geneva's tables (``tests/test_sql_ownership.py``).
"""
