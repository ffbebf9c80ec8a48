"""Fetch a URL with urllib and print its status, length and SHA-256: an ordinary program
that knows nothing of rcunet (the tutorials run it with `rcunet run`)."""

import hashlib
import sys
import urllib.request

url = sys.argv[1] if len(sys.argv) > 1 else "http://b/bytes/100000"
with urllib.request.urlopen(url, timeout=30) as response:
    body = response.read()
    print(response.status, len(body), hashlib.sha256(body).hexdigest()[:16])
