"""Cost reports: what runs really cost, and what they would have cost otherwise."""
