"""Read queries on geneva's tables, one module per reader.

``engine`` (the executor's and operators' reads), ``models`` (the model read
API), ``maintenance`` (housekeeping's batches), and the admin's lists, filters,
statistics and workflow-signal panels; ``limits`` the operators' reads of the
limit tables (``flask geneva limits``, the Limits page, status and gauges).
"""
