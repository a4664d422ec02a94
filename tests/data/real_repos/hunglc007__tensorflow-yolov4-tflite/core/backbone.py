import core.common as common


def cspdarknet53(input_data):
    """(reduced: three downsampling stages)"""
    input_data = common.convolutional(input_data, (3, 3, 3, 16), activate_type="mish")
    input_data = common.convolutional(input_data, (3, 3, 16, 32), downsample=True, activate_type="mish")
    route_1 = common.convolutional(input_data, (3, 3, 32, 32), downsample=True, activate_type="mish")
    route_2 = common.convolutional(route_1, (3, 3, 32, 64), downsample=True, activate_type="mish")
    return route_1, route_2
