"""Azure as both the price source and the provider reach it: the ARM endpoint, the subscription, the
credential chain and the retry policy that leaves HTTP 429 to geotrain (``clients``)."""
