"""The stores: ``base`` (the Backend interface), ``memory``, and a package per store (``file``,
``redis``, ``zookeeper``, ``etcd``, ``sql``). Imported lazily by ``lockkit_core.registry``."""
