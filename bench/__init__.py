"""Benchmarks: Ground Control over HTTP side by side with raw SQL, Redis and etcd (`bench/run`)."""
