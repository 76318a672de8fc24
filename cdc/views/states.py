"""A view's states besides ``running``, ``retrying`` and ``stopped`` (which a sink's share): read
by ``cdc status`` without the view task's imports."""

STARTING = "starting"  # before its first session opened (then running, retrying, stopped)
STANDBY = "standby"  # on Kafka, while another process holds the view's lease (cdc.views.standby)
