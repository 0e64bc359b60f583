"""What groupkeeper knows of the Kafka cluster beside it: brokers, topics, partition counts,
leaders and topic ids (`view.py`), learned from Kafka's ZooKeeper layout (`zookeeper.py`)
or from the brokers' own Metadata API (`brokers.py`).

May import: `store`, `metrics` and `protocol`.
"""
