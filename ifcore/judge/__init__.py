"""Tool-grounded verification (ScopeIF section 4.3): the judge's client, prompts and the sandbox its tools run in.

May import core and math only, never torch: a judge runs beside reward workers."""
