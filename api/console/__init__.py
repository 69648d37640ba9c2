"""The operator console's server side: the views behind ``/v1/admin/...`` (routes_console.py)."""
