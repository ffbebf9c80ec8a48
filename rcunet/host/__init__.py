"""A Host is one network namespace: interfaces, addresses, routes, neighbours, sockets,
receive workers and timers."""
