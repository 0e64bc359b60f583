"""What groupkeeper knows of the Kafka cluster beside it: brokers, topics, partition counts,
leaders and topic ids (`view.py`), learned from Kafka's ZooKeeper layout (`zookeeper.py`)
or from the brokers' own Metadata API (`brokers.py`); where partitions' logs end
(`log_ends.py`: seen in relayed Fetch answers, or asked of the leaders), for consumer lag;
and the ends of transactions as the brokers wrote them (`markers.py`).

May import: `store`, `metrics` and `protocol`.
"""
