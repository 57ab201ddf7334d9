"""Read queries on geneva's tables, one module per reader.

``engine`` (the executor's and operators' reads), ``models`` (the model read
API), ``maintenance`` (housekeeping's batches), and the admin's lists, filters,
statistics and workflow-signal panels.
"""
