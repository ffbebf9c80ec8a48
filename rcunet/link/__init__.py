"""Link layer: drivers (in-memory links, TAP/TUN) and captures (``pcap``: pcap/pcapng)."""
