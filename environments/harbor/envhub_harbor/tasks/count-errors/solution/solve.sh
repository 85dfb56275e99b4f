#!/bin/bash
# Count lines whose level field (the second) is ERROR.
awk '$2 == "ERROR"' /app/server.log | wc -l > /app/answer.txt
