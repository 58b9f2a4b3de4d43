"""Ray actors that run the tracer: the meeting point of Ray and JAX."""
