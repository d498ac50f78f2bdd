from harness9.cli import main

if __name__ == "__main__":
    main()
