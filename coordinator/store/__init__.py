"""Everything groupkeeper keeps in ZooKeeper, and the ZooKeeper server itself."""
