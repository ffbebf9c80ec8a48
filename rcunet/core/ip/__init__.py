"""IP-layer machinery, sans-IO: fragmentation (``fragment``) and reassembly
(``reassembly``) for IPv4 and IPv6.  Routing lives in ``rcunet.core.route`` and the
neighbour cache in ``rcunet.core.neigh``."""
