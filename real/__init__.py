"""The ROS 2 bridge: transports, policy runner, safety layer, robot adapters, recorder."""
