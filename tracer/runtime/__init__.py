"""How the tracer runs in a process (no rendering math): the CPU's cores and XLA devices (``cpu``),
the XLA flags of reproducible CPU arithmetic (``xla_flags``), a process's set-up (``process``),
the work unit's kept programs (``programs``) and the private JAX names used (``jax_private``).
Importing this package or its modules changes nothing in the process."""
