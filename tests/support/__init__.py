"""What the tests share: the real parts they start (ZooKeeper chroots, `groupkeeper run`
processes, Tansu, Apache Kafka), clients and raw connections, certificates, stand-in
brokers and stored groups."""
