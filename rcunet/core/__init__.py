"""Sans-IO protocol machines: no threads, clocks, sockets or randomness; time and random values come in as arguments."""
