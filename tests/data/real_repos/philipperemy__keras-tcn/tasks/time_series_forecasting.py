# A naive time series forecasting toy example (reduced: the prediction plot left out).
import matplotlib.pyplot as plt  # noqa: F401
import numpy as np
import pandas as pd
from tensorflow.keras import Sequential
from tensorflow.keras.layers import Dense

from tcn import TCN

milk = pd.read_csv("monthly-milk-production-pounds-p.csv", index_col=0, parse_dates=True)
lookback_window = 12  # months.
milk = milk.values

x, y = [], []
for i in range(lookback_window, len(milk)):
    x.append(milk[i - lookback_window : i])
    y.append(milk[i])
x = np.array(x)
y = np.array(y)

model = Sequential([TCN(input_shape=(lookback_window, 1), kernel_size=2, use_skip_connections=False, use_batch_norm=False), Dense(1)])
model.summary()
model.compile("adam", "mae")
model.fit(x, y, epochs=1, verbose=0)
