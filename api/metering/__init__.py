"""What callers use: rate limits and quotas, usage and cost, and the audit log."""
