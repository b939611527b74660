from geotrain.pricing.egress import EgressPrices
import geotrain.launcher.loop
