"""classify_exception on exception messages reproduced for real (TF 2.21, Keras 3.15, tf_keras 2.21, hub 0.16).

Each message below is the str() of the exception raised by the script described next to it (copied verbatim,
including Keras 3's ANSI bold codes); tests must not edit them to make a pattern match.
"""

from dataclasses import asdict

import pytest

from mpdoctor.registry import classify_exception
from mpdoctor.tf_messages import dtype_name

# (id, how it was produced, exception type, str(exception), expected subset of the result)
POSITIVE = [
    pytest.param(
        "tf_keras, mixed_float16: hub.KerasLayer(float32-only tf.Module SavedModel)(tf_keras.Input((4,)))",
        "TypeError",
        (
            'Exception encountered when calling layer "keras_layer_1" (type KerasLayer).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow_hub/keras_layer.py", line 242, in call  *\n'
            "        result = f()\n"
            "\n"
            "    TypeError: Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(None, 4), dtype=tf.float16, name='x') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')`. Received args: (<tf.Tensor 'keras_layer_1/Cast:0' shape=(None, 4) dtype=float16>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')).\n"
            "\n"
            "\n"
            'Call arguments received by layer "keras_layer_1" (type KerasLayer):\n'
            "  • inputs=tf.Tensor(shape=(None, 4), dtype=float16)\n"
            "  • training=None"
        ),
        {
            "code": "MP201",
            "received": "float16",
            "accepted": ["float32"],
            "layer": "keras_layer_1",
            "layer_class": "KerasLayer",
        },
        id="tf_keras-hub-functional-float16",
    ),
    pytest.param(
        "tf_keras, mixed_float16: tf_keras.Sequential([Input, hub.KerasLayer(float32-only), Dense])",
        "TypeError",
        (
            'Exception encountered when calling layer "keras_layer" (type KerasLayer).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow_hub/keras_layer.py", line 242, in call  *\n'
            "        result = f()\n"
            "\n"
            "    TypeError: Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(None, 4), dtype=tf.float16, name='x') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')`. Received args: (<tf.Tensor 'keras_layer/Cast:0' shape=(None, 4) dtype=float16>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')).\n"
            "\n"
            "\n"
            'Call arguments received by layer "keras_layer" (type KerasLayer):\n'
            "  • inputs=tf.Tensor(shape=(None, 4), dtype=float16)\n"
            "  • training=None"
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"], "layer_class": "KerasLayer"},
        id="tf_keras-hub-sequential-float16",
    ),
    pytest.param(
        "tf_keras, mixed_float16: hub.KerasLayer(float32-only)(tf.ones((2, 4)))",
        "TypeError",
        (
            "Exception encountered when calling layer 'keras_layer_2' (type KerasLayer).\n"
            "\n"
            "Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(2, 4), dtype=tf.float16, name='x') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')`. Received args: (<tf.Tensor: shape=(2, 4), dtype=float16, numpy=\n"
            "array([[1., 1., 1., 1.],\n"
            "       [1., 1., 1., 1.]], dtype=float16)>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')).\n"
            "\n"
            "Call arguments received by layer 'keras_layer_2' (type KerasLayer):\n"
            "  • inputs=tf.Tensor(shape=(2, 4), dtype=float16)\n"
            "  • training=None"
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"]},
        id="tf_keras-hub-eager-float16",
    ),
    pytest.param(
        "tf_keras, mixed_bfloat16: hub.KerasLayer(float32-only)(Input)",
        "TypeError",
        (
            'Exception encountered when calling layer "keras_layer_1" (type KerasLayer).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow_hub/keras_layer.py", line 242, in call  *\n'
            "        result = f()\n"
            "\n"
            "    TypeError: Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(None, 4), dtype=tf.bfloat16, name='x') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')`. Received args: (<tf.Tensor 'keras_layer_1/Cast:0' shape=(None, 4) dtype=bfloat16>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')).\n"
            "\n"
            "\n"
            'Call arguments received by layer "keras_layer_1" (type KerasLayer):\n'
            "  • inputs=tf.Tensor(shape=(None, 4), dtype=bfloat16)\n"
            "  • training=None"
        ),
        {"code": "MP201", "received": "bfloat16", "accepted": ["float32"]},
        id="tf_keras-hub-functional-bfloat16",
    ),
    pytest.param(
        "tf_keras, mixed_float16: hub.KerasLayer(a tf_keras model.save() dir)(Input): two float32 concrete functions",
        "ValueError",
        (
            'Exception encountered when calling layer "keras_layer_1" (type KerasLayer).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow_hub/keras_layer.py", line 250, in call  *\n'
            "        result = smart_cond.smart_cond(training,\n"
            "\n"
            "    ValueError: Could not find matching concrete function to call loaded from the SavedModel. Got:\n"
            "      Positional arguments (3 total):\n"
            "        * <tf.Tensor 'inputs:0' shape=(None, 4) dtype=float16>\n"
            "        * False\n"
            "        * None\n"
            "      Keyword arguments: {}\n"
            "    \n"
            "     Expected these arguments to match one of the following 2 option(s):\n"
            "    \n"
            "    Option 1:\n"
            "      Positional arguments (3 total):\n"
            "        * TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')\n"
            "        * True\n"
            "        * None\n"
            "      Keyword arguments: {}\n"
            "    \n"
            "    Option 2:\n"
            "      Positional arguments (3 total):\n"
            "        * TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')\n"
            "        * False\n"
            "        * None\n"
            "      Keyword arguments: {}\n"
            "\n"
            "\n"
            'Call arguments received by layer "keras_layer_1" (type KerasLayer):\n'
            "  • inputs=tf.Tensor(shape=(None, 4), dtype=float16)\n"
            "  • training=None"
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"], "pattern": "no_matching_concrete_function"},
        id="tf_keras-hub-over-keras-savedmodel",
    ),
    pytest.param(
        "Keras 3, mixed_float16: TFSMLayer(float32-only, 'serving_default') in a functional model, model.predict",
        "InvalidArgumentError",
        (
            "Graph execution error:\n"
            "\n"
            "Detected at node functional_1/tfsm_layer_1/StatefulPartitionedCall defined at (most recent call last):\n"
            "<stack traces unavailable>\n"
            "Expects arg[0] to be float but half is provided\n"
            "\t [[{{node functional_1/tfsm_layer_1/StatefulPartitionedCall}}]] [Op:__inference_one_step_on_data_distributed_122]"
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"], "arg_index": 0},
        id="keras3-tfsm-predict-float16",
    ),
    pytest.param(
        "Keras 3, mixed_bfloat16: same as above",
        "InvalidArgumentError",
        (
            "Graph execution error:\n"
            "\n"
            "Detected at node functional_1/tfsm_layer_1/StatefulPartitionedCall defined at (most recent call last):\n"
            "<stack traces unavailable>\n"
            "Expects arg[0] to be float but bfloat16 is provided\n"
            "\t [[{{node functional_1/tfsm_layer_1/StatefulPartitionedCall}}]] [Op:__inference_one_step_on_data_distributed_122]"
        ),
        {"code": "MP201", "received": "bfloat16", "accepted": ["float32"]},
        id="keras3-tfsm-predict-bfloat16",
    ),
    pytest.param(
        "Keras 3, mixed_float16: TFSMLayer(model.export() dir, 'serve')(keras.Input((4,))) (ANSI bold in the message)",
        "TypeError",
        (
            "Exception encountered when calling TFSMLayer.call().\n"
            "\n"
            "\x1b[1mCould not automatically infer the output shape / dtype of 'tfsm_layer_1' (of type TFSMLayer). Either the `TFSMLayer.call()` method is incorrect, or you need to implement the `TFSMLayer.compute_output_spec() / compute_output_shape()` method. Error encountered:\n"
            "\n"
            "Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(None, 4), dtype=tf.float16, name='feat') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')`. Received args: (<tf.Tensor 'Placeholder:0' shape=(None, 4) dtype=float16>,) and kwargs: {} for signature: (args_0: TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')).\x1b[0m\n"
            "\n"
            "Arguments received by TFSMLayer.call():\n"
            "  • args=('<KerasTensor shape=(None, 4), dtype=float16, sparse=False, ragged=False, name=keras_tensor_4>',)\n"
            "  • kwargs={'training': 'False'}"
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"], "layer_class": "TFSMLayer"},
        id="keras3-tfsm-build-serve-endpoint",
    ),
    pytest.param(
        "Keras 3, mixed_bfloat16: TFSMLayer(model.export() dir, 'serve')(numpy float32)",
        "TypeError",
        (
            "Exception encountered when calling TFSMLayer.call().\n"
            "\n"
            "\x1b[1mBinding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(2, 4), dtype=tf.bfloat16, name='feat') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')`. Received args: (<tf.Tensor: shape=(2, 4), dtype=bfloat16, numpy=\n"
            "array([[1, 1, 1, 1],\n"
            "       [1, 1, 1, 1]], dtype=bfloat16)>,) and kwargs: {} for signature: (args_0: TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')).\x1b[0m\n"
            "\n"
            "Arguments received by TFSMLayer.call():\n"
            "  • inputs=tf.Tensor(shape=(2, 4), dtype=bfloat16)\n"
            "  • training=False\n"
            "  • kwargs=<class 'inspect._empty'>"
        ),
        {"code": "MP201", "received": "bfloat16", "accepted": ["float32"], "layer_class": "TFSMLayer"},
        id="keras3-tfsm-eager-bfloat16",
    ),
    pytest.param(
        "tf.saved_model.load(float32-only)(tf.ones((2, 4), tf.float16))",
        "TypeError",
        (
            "Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(2, 4), dtype=tf.float16, name='x') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')`. Received args: (<tf.Tensor: shape=(2, 4), dtype=float16, numpy=\n"
            "array([[1., 1., 1., 1.],\n"
            "       [1., 1., 1., 1.]], dtype=float16)>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x'))."
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"]},
        id="tf-saved-model-load-call",
    ),
    pytest.param(
        "tf.saved_model.load(float32-only).signatures['serving_default'](x=float16 tensor)",
        "InvalidArgumentError",
        "cannot compute __inference_signature_wrapper_14 as input #0(zero-based) was expected to be a float tensor but is a half tensor [Op:__inference_signature_wrapper_14]",
        {
            "code": "MP201",
            "received": "float16",
            "accepted": ["float32"],
            "function": "__inference_signature_wrapper_14",
        },
        id="tf-saved-model-signature-call",
    ),
    pytest.param(
        "hub.load(tf_keras model.save() dir) called on float16 inside tf.function",
        "ValueError",
        (
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/sig.py", line 15, in None  *\n'
            "        lambda a: obj2(a)\n"
            "\n"
            "    ValueError: Could not find matching concrete function to call loaded from the SavedModel. Got:\n"
            "      Positional arguments (3 total):\n"
            "        * <tf.Tensor 'inputs:0' shape=(2, 4) dtype=float16>\n"
            "        * False\n"
            "        * None\n"
            "      Keyword arguments: {}\n"
            "    \n"
            "     Expected these arguments to match one of the following 2 option(s):\n"
            "    \n"
            "    Option 1:\n"
            "      Positional arguments (3 total):\n"
            "        * TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')\n"
            "        * True\n"
            "        * None\n"
            "      Keyword arguments: {}\n"
            "    \n"
            "    Option 2:\n"
            "      Positional arguments (3 total):\n"
            "        * TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')\n"
            "        * False\n"
            "        * None\n"
            "      Keyword arguments: {}\n"
        ),
        {"code": "MP201", "received": "float16", "accepted": ["float32"]},
        id="hub-load-call-in-tf-function",
    ),
    pytest.param(
        "tf_keras, mixed_float16: custom layer `x * tf.constant(2.0)`, called eagerly",
        "InvalidArgumentError",
        (
            "Exception encountered when calling layer 'mul' (type Mul).\n"
            "\n"
            "cannot compute Mul as input #1(zero-based) was expected to be a half tensor but is a float tensor [Op:Mul] name: \n"
            "\n"
            "Call arguments received by layer 'mul' (type Mul):\n"
            "  • x=tf.Tensor(shape=(2, 4), dtype=float16)"
        ),
        {
            "code": "MP406",
            "op": "Mul",
            "expected": "float16",
            "received": "float32",
            "input_index": 1,
            "layer": "mul",
            "layer_class": "Mul",
        },
        id="tf_keras-mul-constant-eager",
    ),
    pytest.param(
        "tf_keras, mixed_float16: the same layer on tf_keras.Input",
        "TypeError",
        (
            'Exception encountered when calling layer "mul_1" (type Mul).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406.py", line 18, in call  *\n'
            "        return x * tf.constant(2.0)\n"
            "\n"
            "    TypeError: Input 'y' of 'Mul' Op has type float32 that does not match type float16 of argument 'x'.\n"
            "\n"
            "\n"
            'Call arguments received by layer "mul_1" (type Mul):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "Mul", "expected": "float16", "received": "float32", "input": "y", "argument": "x"},
        id="tf_keras-mul-constant-functional",
    ),
    pytest.param(
        "Keras 3, mixed_float16: custom layer `x * tf.constant(2.0)`, called eagerly",
        "InvalidArgumentError",
        (
            "Exception encountered when calling Mul.call().\n"
            "\n"
            "\x1b[1mcannot compute Mul as input #1(zero-based) was expected to be a half tensor but is a float tensor [Op:Mul] name: \x1b[0m\n"
            "\n"
            "Arguments received by Mul.call():\n"
            "  • x=tf.Tensor(shape=(2, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "Mul", "expected": "float16", "received": "float32", "layer_class": "Mul"},
        id="keras3-mul-constant-eager",
    ),
    pytest.param(
        "Keras 3, mixed_float16: the same layer on keras.Input",
        "TypeError",
        (
            "Exception encountered when calling Mul.call().\n"
            "\n"
            "\x1b[1mCould not automatically infer the output shape / dtype of 'mul_1' (of type Mul). Either the `Mul.call()` method is incorrect, or you need to implement the `Mul.compute_output_spec() / compute_output_shape()` method. Error encountered:\n"
            "\n"
            "Input 'y' of 'Mul' Op has type float32 that does not match type float16 of argument 'x'.\x1b[0m\n"
            "\n"
            "Arguments received by Mul.call():\n"
            "  • args=('<KerasTensor shape=(None, 4), dtype=float16, sparse=False, ragged=False, name=keras_tensor_1>',)\n"
            "  • kwargs=<class 'inspect._empty'>"
        ),
        {"code": "MP406", "op": "Mul", "expected": "float16", "received": "float32"},
        id="keras3-mul-constant-functional",
    ),
    pytest.param(
        "Keras 3: tf.matmul(x, tf.ones((4, 3))) on keras.Input",
        "TypeError",
        (
            "Exception encountered when calling MatMul.call().\n"
            "\n"
            "\x1b[1mCould not automatically infer the output shape / dtype of 'mat_mul_1' (of type MatMul). Either the `MatMul.call()` method is incorrect, or you need to implement the `MatMul.compute_output_spec() / compute_output_shape()` method. Error encountered:\n"
            "\n"
            "Input 'b' of 'MatMul' Op has type float32 that does not match type float16 of argument 'a'.\x1b[0m\n"
            "\n"
            "Arguments received by MatMul.call():\n"
            "  • args=('<KerasTensor shape=(None, 4), dtype=float16, sparse=False, ragged=False, name=keras_tensor_3>',)\n"
            "  • kwargs=<class 'inspect._empty'>"
        ),
        {"code": "MP406", "op": "MatMul", "input": "b", "argument": "a"},
        id="keras3-matmul-float32-weight-functional",
    ),
    pytest.param(
        "tf_keras: x + tf.random.normal(tf.shape(x)), eager",
        "InvalidArgumentError",
        (
            "Exception encountered when calling layer 'noise' (type Noise).\n"
            "\n"
            "cannot compute AddV2 as input #1(zero-based) was expected to be a half tensor but is a float tensor [Op:AddV2] name: \n"
            "\n"
            "Call arguments received by layer 'noise' (type Noise):\n"
            "  • x=tf.Tensor(shape=(2, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "AddV2", "expected": "float16", "received": "float32"},
        id="tf_keras-random-normal-eager",
    ),
    pytest.param(
        "tf_keras: tf.concat([x, float32 zeros]) on Input",
        "TypeError",
        (
            'Exception encountered when calling layer "concat_1" (type Concat).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406.py", line 29, in call  *\n'
            "        return tf.concat([x, tf.zeros_like(x, dtype=tf.float32)], axis=-1)\n"
            "\n"
            "    TypeError: Tensors in list passed to 'values' of 'ConcatV2' Op have types [float16, float32] that don't all match.\n"
            "\n"
            "\n"
            'Call arguments received by layer "concat_1" (type Concat):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "ConcatV2", "dtypes": ["float16", "float32"]},
        id="tf_keras-concat-functional",
    ),
    pytest.param(
        "Keras 3: tf.concat([x, float32 zeros]), eager",
        "InvalidArgumentError",
        (
            "Exception encountered when calling Concat.call().\n"
            "\n"
            "\x1b[1mcannot compute ConcatV2 as input #1(zero-based) was expected to be a half tensor but is a float tensor [Op:ConcatV2] name: concat\x1b[0m\n"
            "\n"
            "Arguments received by Concat.call():\n"
            "  • x=tf.Tensor(shape=(2, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "ConcatV2", "input_index": 1},
        id="keras3-concat-eager",
    ),
    pytest.param(
        "tf_keras: tf.where(x > 0, x, tf.zeros(tf.shape(x))) on Input",
        "TypeError",
        (
            'Exception encountered when calling layer "where_1" (type Where).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406b.py", line 23, in call  *\n'
            "        return tf.where(x > 0, x, tf.zeros(tf.shape(x)))\n"
            "\n"
            "    TypeError: Input 'e' of 'SelectV2' Op has type float32 that does not match type float16 of argument 't'.\n"
            "\n"
            "\n"
            'Call arguments received by layer "where_1" (type Where):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "SelectV2", "input": "e", "argument": "t"},
        id="tf_keras-where-functional",
    ),
    pytest.param(
        "tf_keras: x * tf.Variable(2.0) (a raw float32 variable), eager",
        "InvalidArgumentError",
        (
            "Exception encountered when calling layer 'var_mul' (type VarMul).\n"
            "\n"
            "cannot compute Mul as input #1(zero-based) was expected to be a half tensor but is a float tensor [Op:Mul] name: \n"
            "\n"
            "Call arguments received by layer 'var_mul' (type VarMul):\n"
            "  • x=tf.Tensor(shape=(2, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": "Mul"},
        id="tf_keras-tf-variable-eager",
    ),
    pytest.param(
        "tf_keras: tf.nn.bias_add(x, tf.zeros([4])) on Input",
        "ValueError",
        (
            'Exception encountered when calling layer "bias_1" (type Bias).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406b.py", line 26, in call  *\n'
            "        return tf.nn.bias_add(x, tf.zeros([4]))\n"
            "\n"
            "    ValueError: bias: Tensor conversion requested dtype float16 for Tensor with dtype float32: <tf.Tensor 'bias_1/zeros:0' shape=(4,) dtype=float32>\n"
            "\n"
            "\n"
            'Call arguments received by layer "bias_1" (type Bias):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=float16)"
        ),
        {"code": "MP406", "op": None, "argument": "bias", "expected": "float16", "received": "float32"},
        id="tf_keras-bias-add-functional",
    ),
    pytest.param(
        "tf_keras: tf.convert_to_tensor(float32 tensor, dtype=x.dtype) on Input",
        "ValueError",
        (
            'Exception encountered when calling layer "conv_1" (type Conv).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406b.py", line 29, in call  *\n'
            "        return tf.convert_to_tensor(tf.zeros([4]), dtype=x.dtype)\n"
            "\n"
            "    ValueError: Tensor conversion requested dtype float16 for Tensor with dtype float32: <tf.Tensor 'conv_1/zeros:0' shape=(4,) dtype=float32>\n"
            "\n"
            "\n"
            'Call arguments received by layer "conv_1" (type Conv):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=float16)"
        ),
        {"code": "MP406", "argument": None, "expected": "float16", "received": "float32"},
        id="tf_keras-convert-to-tensor-functional",
    ),
    pytest.param(
        "tf_keras autocasts only the first call argument: layer(x, scale) computing x * scale",
        "TypeError",
        (
            'Exception encountered when calling layer "two" (type Two).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406.py", line 32, in call  *\n'
            "        return x * scale\n"
            "\n"
            "    TypeError: Input 'y' of 'Mul' Op has type float32 that does not match type float16 of argument 'x'.\n"
            "\n"
            "\n"
            'Call arguments received by layer "two" (type Two):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=float16)\n"
            "  • scale=tf.Tensor(shape=(None, 4), dtype=float32)"
        ),
        {"code": "MP406", "op": "Mul", "layer": "two", "layer_class": "Two"},
        id="tf_keras-second-argument-functional",
    ),
    pytest.param(
        "tf_keras, mixed_bfloat16: x * tf.constant(2.0), eager",
        "InvalidArgumentError",
        (
            "Exception encountered when calling layer 'mul' (type Mul).\n"
            "\n"
            "cannot compute Mul as input #1(zero-based) was expected to be a bfloat16 tensor but is a float tensor [Op:Mul] name: \n"
            "\n"
            "Call arguments received by layer 'mul' (type Mul):\n"
            "  • x=tf.Tensor(shape=(2, 4), dtype=bfloat16)"
        ),
        {"code": "MP406", "op": "Mul", "expected": "bfloat16", "received": "float32"},
        id="tf_keras-mul-constant-bfloat16-eager",
    ),
    pytest.param(
        "tf_keras, mixed_bfloat16: the same on Input",
        "TypeError",
        (
            'Exception encountered when calling layer "mul_1" (type Mul).\n'
            "\n"
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406.py", line 18, in call  *\n'
            "        return x * tf.constant(2.0)\n"
            "\n"
            "    TypeError: Input 'y' of 'Mul' Op has type float32 that does not match type bfloat16 of argument 'x'.\n"
            "\n"
            "\n"
            'Call arguments received by layer "mul_1" (type Mul):\n'
            "  • x=tf.Tensor(shape=(None, 4), dtype=bfloat16)"
        ),
        {"code": "MP406", "op": "Mul", "expected": "bfloat16", "received": "float32"},
        id="tf_keras-mul-constant-bfloat16-functional",
    ),
    pytest.param(
        "a tf.function computing a_float16 * tf.constant(1.0)",
        "TypeError",
        (
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/mp406b.py", line 38, in g  *\n'
            "        return a * tf.constant(1.0)\n"
            "\n"
            "    TypeError: Input 'y' of 'Mul' Op has type float32 that does not match type float16 of argument 'x'.\n"
        ),
        {"code": "MP406", "op": "Mul"},
        id="tf-function-mul",
    ),
    pytest.param(
        "Keras 3: keras.Sequential([keras.Input((4,)), hub.KerasLayer(path)])",
        "ValueError",
        "Only instances of `keras.Layer` can be added to a Sequential model. Received: <tensorflow_hub.keras_layer.KerasLayer object at 0x7f07e01a5690> (of type <class 'tensorflow_hub.keras_layer.KerasLayer'>)",
        {"code": "MP104", "reason": "sequential", "received_class": "tensorflow_hub.keras_layer.KerasLayer"},
        id="keras3-hub-in-sequential",
    ),
    pytest.param(
        "Keras 3: hub.KerasLayer(path)(keras.Input((4,)))",
        "TypeError",
        (
            "Exception encountered when calling layer 'keras_layer_1' (type KerasLayer).\n"
            "\n"
            "Binding inputs to tf.function failed due to `A KerasTensor cannot be used as input to a TensorFlow function. A KerasTensor is a symbolic placeholder for a shape and dtype, used when constructing Keras Functional models or Keras Functions. You can only use it as input to a Keras layer or a Keras operation (from the namespaces `keras.layers` and `keras.ops`). You are likely doing something like:\n"
            "\n"
            "```\n"
            "x = Input(...)\n"
            "...\n"
            "tf_fn(x)  # Invalid.\n"
            "```\n"
            "\n"
            "What you should do instead is wrap `tf_fn` in a layer:\n"
            "\n"
            "```\n"
            "class MyLayer(Layer):\n"
            "    def call(self, x):\n"
            "        return tf_fn(x)\n"
            "\n"
            "x = MyLayer()(x)\n"
            "```\n"
            "`. Received args: (<KerasTensor shape=(None, 4), dtype=float32, sparse=False, ragged=False, name=keras_tensor_9>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')).\n"
            "\n"
            "Call arguments received by layer 'keras_layer_1' (type KerasLayer):\n"
            "  • inputs=<KerasTensor shape=(None, 4), dtype=float32, sparse=False, ragged=False, name=keras_tensor_9>\n"
            "  • training=None"
        ),
        {"code": "MP104", "reason": "keras_tensor", "layer_class": "KerasLayer"},
        id="keras3-hub-on-keras-input",
    ),
    pytest.param(
        "tf.compat.v1 Saver: float32 checkpoint restored into float16 get_variable()s",
        "InvalidArgumentError",
        (
            "Restoring from checkpoint failed. This is most likely due to a mismatch between the current graph and the graph from the checkpoint. Please ensure that you have not altered the graph expected based on the checkpoint. Original error:\n"
            "\n"
            "Graph execution error:\n"
            "\n"
            "Detected at node 'save/RestoreV2' defined at (most recent call last):\n"
            '    File "/tmp/exc/mp301.py", line 24, in <module>\n'
            "Node: 'save/RestoreV2'\n"
            "tensor_name = dense/bias; expected dtype half does not equal original dtype float\n"
            "tensor_name = dense/kernel; expected dtype half does not equal original dtype float\n"
            "\t [[{{node save/RestoreV2}}]]\n"
            "\n"
            "Original stack trace for 'save/RestoreV2':\n"
            '  File "/tmp/exc/mp301.py", line 24, in <module>\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/training/saver.py", line 934, in __init__\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/training/saver.py", line 946, in build\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/training/saver.py", line 974, in _build\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/training/saver.py", line 543, in _build_internal\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/training/saver.py", line 360, in _AddRestoreOps\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/training/saver.py", line 611, in bulk_restore\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/ops/gen_io_ops.py", line 1522, in restore_v2\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/framework/op_def_library.py", line 796, in _apply_op_helper\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/framework/ops.py", line 2726, in _create_op_internal\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/framework/ops.py", line 1221, in from_node_def\n'
        ),
        {
            "code": "MP301",
            "tensors": [
                {"name": "dense/bias", "variable_dtype": "float16", "checkpoint_dtype": "float32"},
                {"name": "dense/kernel", "variable_dtype": "float16", "checkpoint_dtype": "float32"},
            ],
        },
        id="tf1-saver-restore-float16",
    ),
    pytest.param(
        "tf.train.Checkpoint(w=float16 Variable).restore(float32 checkpoint)",
        "InvalidArgumentError",
        (
            "{{function_node __wrapped__RestoreV2_dtypes_2_device_/job:localhost/replica:0/task:0/device:CPU:0}} tensor_name = b/.ATTRIBUTES/VARIABLE_VALUE; expected dtype half does not equal original dtype float\n"
            "tensor_name = w/.ATTRIBUTES/VARIABLE_VALUE; expected dtype half does not equal original dtype float [Op:RestoreV2]"
        ),
        {"code": "MP301", "variable_dtype": "float16", "checkpoint_dtype": "float32"},
        id="tf2-checkpoint-restore-float16",
    ),
    pytest.param(
        "Keras 3 model built under policy float16, tf.train.Checkpoint(model=m).restore(float32 checkpoint)",
        "InvalidArgumentError",
        (
            "{{function_node __wrapped__RestoreV2_dtypes_2_device_/job:localhost/replica:0/task:0/device:CPU:0}} tensor_name = model/_operations/1/_kernel/.ATTRIBUTES/VARIABLE_VALUE; expected dtype half does not equal original dtype float\n"
            "tensor_name = model/_operations/1/bias/.ATTRIBUTES/VARIABLE_VALUE; expected dtype half does not equal original dtype float [Op:RestoreV2]"
        ),
        {"code": "MP301", "variable_dtype": "float16", "checkpoint_dtype": "float32"},
        id="keras3-checkpoint-policy-float16",
    ),
    pytest.param(
        "tf_keras model under policy float16: load_weights(TF-format weights saved in float32)",
        "InvalidArgumentError",
        (
            "{{function_node __wrapped__RestoreV2_dtypes_2_device_/job:localhost/replica:0/task:0/device:CPU:0}} tensor_name = layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE; expected dtype half does not equal original dtype float\n"
            "tensor_name = layer_with_weights-0/bias/.ATTRIBUTES/VARIABLE_VALUE; expected dtype half does not equal original dtype float [Op:RestoreV2]"
        ),
        {
            "code": "MP301",
            "tensors": [
                {
                    "name": "layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                    "variable_dtype": "float16",
                    "checkpoint_dtype": "float32",
                },
                {
                    "name": "layer_with_weights-0/bias/.ATTRIBUTES/VARIABLE_VALUE",
                    "variable_dtype": "float16",
                    "checkpoint_dtype": "float32",
                },
            ],
        },
        id="tf_keras-load-weights-tf-format-policy-float16",
    ),
    pytest.param(
        "tf.train.Checkpoint(w=bfloat16 Variable).restore(float32 checkpoint)",
        "InvalidArgumentError",
        "{{function_node __wrapped__RestoreV2_dtypes_1_device_/job:localhost/replica:0/task:0/device:CPU:0}} tensor_name = w/.ATTRIBUTES/VARIABLE_VALUE; expected dtype bfloat16 does not equal original dtype float [Op:RestoreV2]",
        {"code": "MP301", "variable_dtype": "bfloat16", "checkpoint_dtype": "float32"},
        id="tf2-checkpoint-restore-bfloat16",
    ),
    pytest.param(
        "tf.train.Checkpoint(w=float32 Variable).restore(float16 checkpoint)",
        "InvalidArgumentError",
        "{{function_node __wrapped__RestoreV2_dtypes_1_device_/job:localhost/replica:0/task:0/device:CPU:0}} tensor_name = w/.ATTRIBUTES/VARIABLE_VALUE; expected dtype float does not equal original dtype half [Op:RestoreV2]",
        {"code": "MP301", "variable_dtype": "float32", "checkpoint_dtype": "float16"},
        id="tf2-checkpoint-float16-into-float32",
    ),
    pytest.param(
        "Keras 3.15.1: set_dtype_policy('int8_from_float32'), Sequential([Input((4,)), Dense(3)]) called",
        "NotImplementedError",
        (
            "Exception encountered when calling Sequential.call().\n\n\x1b[1mLayer Sequential does not have a "
            "`_int8_call` method implemented.\x1b[0m\n\nArguments received by Sequential.call():\n"
            "  • args=('tf.Tensor(shape=(2, 4), dtype=float32)',)\n  • kwargs={'mask': 'None'}"
        ),
        {"code": "MP701", "mode": "int8", "failing_class": "Sequential"},
        id="keras3-global-quantized-policy",
    ),
    pytest.param(
        "Keras 3.15.1: mixed_float16, Sequential of Dense, model.quantize('int8')",
        "ValueError",
        (
            "Quantization mode='int8' doesn't work well with compute_dtype='float16'. Consider loading model/layer "
            "with another dtype policy such as 'mixed_bfloat16' or 'mixed_float16' before calling `quantize()`."
        ),
        {"code": "MP702", "mode": "int8"},
        id="keras3-quantize-int8-float16",
    ),
    pytest.param(
        "Keras 3.15.1: Sequential([Dense(8), Dense(3)]) without Input, model.quantize('int8')",
        "ValueError",
        "Cannot quantize a layer that isn't yet built. Layer 'sequential_6' (of type 'Sequential') is not built yet.",
        {"code": "MP703", "reason": "not built"},
        id="keras3-quantize-unbuilt",
    ),
    pytest.param(
        "Keras 3.15.1: model.quantize('int8') then model.quantize('int4')",
        "ValueError",
        "Layer 'dense_15' is already quantized with dtype_policy='int8_from_float32'. Received: mode=int4",
        {"code": "MP703", "reason": "already quantized"},
        id="keras3-quantize-twice",
    ),
    pytest.param(
        "Keras 3.15.1: Sequential of two Dense quantized int8, save_weights, load_weights into the float model",
        "ValueError",
        (
            "A total of 2 objects could not be loaded. Example error message for object <Dense name=dense_2, "
            "built=True>:\n\nLayer 'dense_2' expected 2 variables, but received 3 variables during loading. "
            "Expected: ['kernel', 'bias']\n\nList of objects that could not be loaded:\n[<Dense name=dense_2, "
            "built=True>, <Dense name=dense_3, built=True>]"
        ),
        {"code": "MP706", "model_mode": None, "file_mode": "int8", "layer": "dense_2", "layer_class": "Dense"},
        id="keras3-int8-weights-into-float-model",
    ),
]

# Real messages no mixed-precision rule explains: MP001 reports them.
NEGATIVE = [
    pytest.param(
        "hub.load-style object called with the right dtype, wrong shape",
        "ValueError",
        (
            "Could not find matching concrete function to call loaded from the SavedModel. Got:\n"
            "  Positional arguments (3 total):\n"
            "    * <tf.Tensor 'inputs:0' shape=(2, 5) dtype=float32>\n"
            "    * False\n"
            "    * None\n"
            "  Keyword arguments: {}\n"
            "\n"
            " Expected these arguments to match one of the following 2 option(s):\n"
            "\n"
            "Option 1:\n"
            "  Positional arguments (3 total):\n"
            "    * TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')\n"
            "    * True\n"
            "    * None\n"
            "  Keyword arguments: {}\n"
            "\n"
            "Option 2:\n"
            "  Positional arguments (3 total):\n"
            "    * TensorSpec(shape=(None, 4), dtype=tf.float32, name='feat')\n"
            "    * False\n"
            "    * None\n"
            "  Keyword arguments: {}"
        ),
        id="shape-mismatch-no-matching-concrete-function",
    ),
    pytest.param(
        "tf.saved_model.load(...)(float32 of the wrong shape)",
        "TypeError",
        (
            "Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(2, 5), dtype=tf.float32, name='x') to TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')`. Received args: (<tf.Tensor: shape=(2, 5), dtype=float32, numpy=\n"
            "array([[1., 1., 1., 1., 1.],\n"
            "       [1., 1., 1., 1., 1.]], dtype=float32)>,) and kwargs: {} for signature: (x: TensorSpec(shape=(None, 4), dtype=tf.float32, name='x'))."
        ),
        id="shape-mismatch-cannot-cast",
    ),
    pytest.param(
        "tf.function: float32 * tf.constant(2) (int32)",
        "TypeError",
        (
            "in user code:\n"
            "\n"
            '    File "/tmp/exc/neg.py", line 12, in None  *\n'
            "        lambda a: a * tf.constant(2)\n"
            "\n"
            "    TypeError: Input 'y' of 'Mul' Op has type int32 that does not match type float32 of argument 'x'.\n"
        ),
        id="int-float-graph",
    ),
    pytest.param(
        "eager float32 * int32",
        "InvalidArgumentError",
        "cannot compute Mul as input #1(zero-based) was expected to be a float tensor but is a int32 tensor [Op:Mul] name: ",
        id="int-float-eager",
    ),
    pytest.param(
        "keras.Sequential([Input, a lambda]) (not a hub layer)",
        "ValueError",
        "Only instances of `keras.Layer` can be added to a Sequential model. Received: <function <lambda>.<locals>.<lambda> at 0x7f8cfc205e40> (of type <class 'function'>)",
        id="sequential-non-layer",
    ),
    pytest.param(
        "a user tf.function called on keras.Input (no hub layer)",
        "TypeError",
        (
            "Binding inputs to tf.function failed due to `A KerasTensor cannot be used as input to a TensorFlow function. A KerasTensor is a symbolic placeholder for a shape and dtype, used when constructing Keras Functional models or Keras Functions. You can only use it as input to a Keras layer or a Keras operation (from the namespaces `keras.layers` and `keras.ops`). You are likely doing something like:\n"
            "\n"
            "```\n"
            "x = Input(...)\n"
            "...\n"
            "tf_fn(x)  # Invalid.\n"
            "```\n"
            "\n"
            "What you should do instead is wrap `tf_fn` in a layer:\n"
            "\n"
            "```\n"
            "class MyLayer(Layer):\n"
            "    def call(self, x):\n"
            "        return tf_fn(x)\n"
            "\n"
            "x = MyLayer()(x)\n"
            "```\n"
            "`. Received args: (<KerasTensor shape=(None, 4), dtype=float32, sparse=False, ragged=False, name=keras_tensor_1>,) and kwargs: {} for signature: (a: TensorSpec(shape=(None, 4), dtype=tf.float32, name=None))."
        ),
        id="keras-tensor-into-user-tf-function",
    ),
    pytest.param(
        "tf.train.Checkpoint restore of a [4] value into a [3] variable",
        "ValueError",
        "Received incompatible tensor with shape (4,) when attempting to restore variable with shape (3,) and name Variable:0.",
        id="checkpoint-shape-mismatch",
    ),
    pytest.param(
        "ones((2, 3)) + ones((2, 4))",
        "InvalidArgumentError",
        "{{function_node __wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:CPU:0}} Incompatible shapes: [2,3] vs. [2,4] [Op:AddV2] name: ",
        id="incompatible-shapes",
    ),
    pytest.param(
        "Keras 3: TFSMLayer(...)(x)['output_0'] on a signature whose output is named 'd'",
        "KeyError",
        "'output_0'",
        id="tfsm-dict-output-in-functional",
    ),
    pytest.param(
        "Keras 3.15.1: float Dense(8) weights loaded into Dense(8, use_bias=False) (not quantization: MP001)",
        "ValueError",
        (
            "A total of 1 objects could not be loaded. Example error message for object <Dense name=dense_6, "
            "built=True>:\n\nLayer 'dense_6' expected 1 variables, but received 2 variables during loading. "
            "Expected: ['kernel']\n\nList of objects that could not be loaded:\n[<Dense name=dense_6, built=True>]"
        ),
        id="keras3-float-bias-mismatch",
    ),
]


@pytest.mark.parametrize("how, exc_type, message, expected", POSITIVE)
def test_reproduced_messages_map_to_their_rule(how, exc_type, message, expected):
    found = classify_exception(message)
    assert found is not None, how
    read = asdict(found)  # the rule's verdict record, its details included
    assert {key: read.get(key) for key in expected} == expected, (how, found)


@pytest.mark.parametrize("how, exc_type, message", NEGATIVE)
def test_other_real_messages_are_left_to_mp001(how, exc_type, message):
    assert classify_exception(message) is None, how


def test_no_matching_concrete_function_when_some_option_accepts_the_dtype():
    # A shape problem, not a dtype one: one of the options takes float16.
    message = (
        "Could not find matching concrete function to call loaded from the SavedModel. Got:\n"
        "  Positional arguments (1 total):\n    * <tf.Tensor 'x:0' shape=(2, 5) dtype=float16>\n"
        "  Keyword arguments: {}\n\n Expected these arguments to match one of the following 2 option(s):\n\n"
        "Option 1:\n  Positional arguments (1 total):\n"
        "    * TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')\n  Keyword arguments: {}\n\n"
        "Option 2:\n  Positional arguments (1 total):\n"
        "    * TensorSpec(shape=(None, 4), dtype=tf.float16, name='x')\n  Keyword arguments: {}"
    )
    assert classify_exception(message) is None
    float32_only = message.replace(
        "dtype=tf.float16, name='x')\n  Keyword arguments: {}", "dtype=tf.float32, name='x')\n  Keyword arguments: {}"
    )
    found = classify_exception(float32_only)
    assert found.code == "MP201" and found.accepted == ["float32"] and found.received == "float16"


def test_several_options_with_different_dtypes_are_all_accepted():
    message = (
        "Could not find matching concrete function to call loaded from the SavedModel. Got:\n"
        "    * <tf.Tensor 'x:0' shape=(2, 4) dtype=bfloat16>\n"
        " Expected these arguments to match one of the following 2 option(s):\n"
        "Option 1:\n    * TensorSpec(shape=(None, 4), dtype=tf.float32, name='x')\n"
        "Option 2:\n    * TensorSpec(shape=(None, 4), dtype=tf.float16, name='x')\n"
    )
    found = classify_exception(message)
    assert found.received == "bfloat16" and found.accepted == ["float16", "float32"]


def test_loose_expected_but_wording():
    found = classify_exception("Mul: expected half but is float")
    assert found.code == "MP406" and found.expected == "float16" and found.received == "float32"
    assert classify_exception("expected int32 but is int64") is None


def test_restore_duplicates_are_reported_once():
    line = "tensor_name = dense/kernel; expected dtype half does not equal original dtype float\n"
    found = classify_exception(line + "Original error:\n" + line)
    assert asdict(found)["tensors"] == [
        {"name": "dense/kernel", "variable_dtype": "float16", "checkpoint_dtype": "float32"}
    ]


def test_empty_and_unrelated_messages():
    assert classify_exception("") is None
    assert classify_exception(None) is None
    assert classify_exception("'output_0'") is None


@pytest.mark.parametrize(
    "text, name",
    [
        ("half", "float16"),
        ("float", "float32"),
        ("double", "float64"),
        ("tf.float16", "float16"),
        ("bfloat16", "bfloat16"),
        ("int32", "int32"),
    ],
)
def test_dtype_name(text, name):
    assert dtype_name(text) == name


SEED_MESSAGE = (
    "TypeError: Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(None, 224, 224, 3), "
    "dtype=tf.float16, name=None) to TensorSpec(shape=(None, 224, 224, 3), dtype=tf.float32, name=None)`. Received "
    "args: (<tf.Tensor 'keras_layer/Cast:0' shape=(None, 224, 224, 3) dtype=float16>,) and 4 more arguments"
)


def _words(text: str) -> list[str]:
    return text.replace("...", " ").split()


def test_long_messages_are_cut_between_words_with_an_ellipsis():
    from mpdoctor.tf_messages import first_message_line

    shown = first_message_line("Exception encountered when calling layer 'x'\n" + SEED_MESSAGE)
    assert len(SEED_MESSAGE) > 300 >= len(shown)
    assert shown.endswith("...") and shown.startswith("TypeError: Binding inputs")
    assert set(_words(shown)) <= set(SEED_MESSAGE.split())  # whole words only, nothing cut mid-word
    assert "dtype=tf.float16" in shown and "dtype=tf.float32" in shown


def test_the_part_naming_the_dtypes_survives_the_cut():
    from mpdoctor.tf_messages import shorten

    message = (
        "InvalidArgumentError: cannot compute __inference_signature_wrapper_123 as input #0(zero-based) "
        + "with a very long preamble about graph nodes " * 12
        + "was expected to be a float tensor but is a half tensor [Op:__inference_signature_wrapper_123]"
    )
    shown = shorten(message)
    assert len(shown) <= 300 and shown.startswith("InvalidArgumentError: cannot compute")
    assert "was expected to be a float tensor but is a half tensor" in shown
    assert " ... " in shown and set(_words(shown)) <= set(message.split())


def test_short_messages_are_left_alone():
    from mpdoctor.tf_messages import shorten

    assert shorten("  ValueError: expected half  ") == "ValueError: expected half"
    assert shorten("x" * 400).endswith("...") and len(shorten("x" * 400)) == 300  # one endless word: cut anyway
