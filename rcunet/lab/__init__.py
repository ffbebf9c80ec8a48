"""The seed lab: each seed's scenario run through whole Hosts, legacy beside modern."""
