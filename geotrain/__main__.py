from geotrain.cli import main

main()
