"""The domain core: the data contract (contract §2), the metric SQL (§3, §4), the gates (§5)
and the offline analyzer (§6). It imports no adapter; everything else depends on it."""
